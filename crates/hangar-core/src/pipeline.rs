//! A pipeline's config: Concourse's `fly set-pipeline` format
//! (<https://concourse-ci.org/pipelines.html>), read from YAML as Concourse
//! reads it, validated whole, and compared with another for the
//! "here is what changes" display.
//!
//! Reading goes through [`crate::yaml`] (YAML 1.1 scalars, merge keys,
//! bounded aliases and depth), then maps the value onto [`PipelineConfig`]
//! field by field, so that every refusal names its place the way
//! Concourse's validator does (`jobs.build.plan.do[0].get(repo): unknown
//! resource 'repo'`). Every problem is collected and returned together:
//! first the shape of the document (wrong types, unknown fields), then, if
//! the shape is sound, the rules between its parts (names, references,
//! cycles). Warnings are Concourse's: names that are not valid identifiers,
//! deprecated fields, settings that have no effect.
//!
//! `((vars))` are left in place: they may stand wherever Concourse takes
//! free-form values (`source`, `params`, `vars`, a pinned version, a task's
//! config strings) and are interpolated later, when a build runs. Where
//! Concourse needs a typed value at set-pipeline time (`timeout`,
//! `attempts`, `check_every`), a var is refused as Concourse refuses it.
//!
//! Where hangar is stricter than Concourse, the message says what Concourse
//! would do:
//! - names holding `/`, `\`, control characters, or being `.` or `..`, or
//!   longer than [`MAX_NAME_LEN`], are refused (Concourse only warns): they
//!   become URL segments and directory names;
//! - a job with no plan is refused (Concourse runs it as an empty build);
//! - resource type names, their `type`s and every worker tag follow
//!   [`crate::names::validate_label`], as a build's `resource_types` do, so
//!   a pipeline accepted here is one whose builds hangar can run;
//! - hermetic tasks, `run` steps and `prototypes` are refused rather than
//!   ignored; an `across` is bounded ([`MAX_ACROSS_COMBINATIONS`]) and its
//!   job planned when read, every combination written out, so one too
//!   large for a build plan is refused then;
//! - an artifact a step reads (a put's `inputs`, a task's `image`, inputs
//!   and `file:`) that no step of the job produces is refused;
//! - `version` of a get is `latest`, `every` or a version; Concourse reads
//!   any other string as `latest`;
//! - sizes are bounded: [`MAX_CONFIG_BYTES`], [`MAX_JOBS`],
//!   [`MAX_RESOURCES`], [`MAX_GROUPS`], [`MAX_VAR_SOURCES`],
//!   [`crate::resource_types::MAX_RESOURCE_TYPES`], [`MAX_STEPS`],
//!   [`MAX_STEP_DEPTH`], [`MAX_GLOB_WORK`]. Every check is linear in the
//!   size of the config, or bounded by these.
//!
//! A resource's `type` that is no custom type is taken as a base type and
//! left to the workers: which base types exist is known only when a worker
//! runs the check, and changes as workers come and go.
//!
//! `check_every` is taken on resources and resource types here, though a
//! build's `resource_types` refuse it: periodic checks belong to pipelines.
//!
//! Written back as JSON, the config has Concourse's `get-pipeline` shape:
//! sections and their entries in Concourse's field order, defaults left
//! out, steps as mappings with sorted keys, `in_parallel` always as
//! `{steps, limit, fail_fast}`. Durations keep the text the user wrote
//! (`1m`) where Concourse writes Go's (`1m0s`), so a config reads back the
//! same; unknown top-level keys (where pipelines keep YAML anchors) are
//! dropped, as Concourse drops them.

use std::fmt;
use std::time::Duration;

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod diff;
mod glob;
pub mod log_retention;
mod names;
mod read;
mod read_across;
mod read_steps;
mod steps;
mod validate;
mod worker_types;

pub use diff::{diff, Change, ConfigDiff, DiffLine, ItemDiff, Section};
pub use names::is_bidi_or_invisible;
pub use read_across::{AcrossPlanError, MAX_ACROSS_COMBINATIONS};
pub use steps::{
    AcrossStep, AcrossVar, Action, GetStep, GetVersion, InParallelStep, LoadVarFormat, LoadVarStep,
    PutInputs, PutStep, SetPipelineStep, Step, TaskStep,
};
pub use worker_types::types_no_worker_has;

/// The largest config accepted, in bytes, checked before parsing.
pub const MAX_CONFIG_BYTES: usize = 4 * 1024 * 1024;
/// The most jobs one pipeline may hold.
pub const MAX_JOBS: usize = 1000;
/// The most resources one pipeline may hold.
pub const MAX_RESOURCES: usize = 1000;
/// The most groups one pipeline may hold.
pub const MAX_GROUPS: usize = 1000;
/// The most var sources one pipeline may hold.
pub const MAX_VAR_SOURCES: usize = 64;
/// The most steps in the whole pipeline, hooks and nested steps included.
pub const MAX_STEPS: usize = 20_000;
/// The deepest nesting of steps (`do`, `in_parallel`, `try`, hooks).
pub const MAX_STEP_DEPTH: usize = 16;
/// The longest name of a job, resource, group, var source or step.
pub const MAX_NAME_LEN: usize = 128;
/// Glob patterns (in `passed` and groups' `jobs`) are matched against every
/// job; their count times the number of jobs may not pass this.
pub const MAX_GLOB_WORK: usize = 1_000_000;

/// The keys that name a step's kind: written first when a config is
/// written back as YAML (`get: repo` before its `passed`).
pub const STEP_KEYS: [&str; 8] = [
    "get",
    "put",
    "task",
    "set_pipeline",
    "load_var",
    "in_parallel",
    "do",
    "try",
];

/// A config (or a part of one) as block YAML in Concourse's order, as fly
/// prints it: `get-pipeline`, `format-pipeline`, `set-pipeline`'s diff.
pub fn to_yaml<T: Serialize>(part: &T) -> String {
    crate::yaml_write::to_yaml_ordered_leading(part, &STEP_KEYS)
}

/// A pipeline's config.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PipelineConfig {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Group>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub var_sources: Vec<VarSource>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Resource>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_types: Vec<ResourceType>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<Job>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<Display>,
    /// Free-form data Concourse keeps with the config and ignores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_data: Option<Value>,
}

/// A tab of the pipeline's page: the jobs (names or glob patterns) and
/// resources it shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
}

/// A credential manager the pipeline's `((source:vars))` are read from,
/// kept as declared: its config is the credential manager's business.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VarSource {
    pub name: String,
    #[serde(rename = "type")]
    pub source_type: String,
    pub config: Value,
}

/// The var source types Concourse accepts in a pipeline. hangar resolves
/// only `crate::vars::var_sources::SUPPORTED_TYPES` (`dummy`) and refuses
/// the others when a pipeline is set, saying so.
pub const VAR_SOURCE_TYPES: &[&str] = &["vault", "dummy", "ssm", "secretsmanager", "idtoken"];

/// A resource: a versioned thing jobs get and put.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resource {
    pub name: String,
    /// The name it had before, so that a rename keeps its history.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_name: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub public: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_token: Option<String>,
    /// A custom type of this pipeline, else a base type of the workers.
    #[serde(rename = "type")]
    pub resource_type: String,
    pub source: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_every: Option<CheckEvery>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_timeout: Option<GoDuration>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The version the resource is pinned to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub expose_build_created_by: bool,
}

/// A custom resource type of the pipeline (compare
/// [`crate::resource_types::ResourceType`], a build's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResourceType {
    pub name: String,
    #[serde(rename = "type")]
    pub resource_type: String,
    pub source: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defaults: Option<Map<String, Value>>,
    /// The type's check, get and put containers run privileged, on
    /// workers started with `--allow-privileged`.
    #[serde(skip_serializing_if = "is_false")]
    pub privileged: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_every: Option<CheckEvery>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Value>>,
}

impl ResourceType {
    /// The type as a build carries it.
    pub fn to_build_type(&self) -> crate::resource_types::ResourceType {
        crate::resource_types::ResourceType {
            name: self.name.clone(),
            resource_type: self.resource_type.clone(),
            source: self.source.clone(),
            params: self.params.clone(),
            tags: self.tags.clone(),
            defaults: self.defaults.clone(),
            privileged: self.privileged,
        }
    }
}

/// How often a resource is checked: an interval, or never.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckEvery {
    Never,
    Interval(GoDuration),
}

impl Serialize for CheckEvery {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CheckEvery::Never => s.serialize_str("never"),
            CheckEvery::Interval(d) => d.serialize(s),
        }
    }
}

/// A Go duration (`1h30m`, `90s`) as written, with its value. The text is
/// kept so that the config is given back as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoDuration {
    pub text: String,
    pub duration: Duration,
}

impl GoDuration {
    /// Parses Go's duration syntax (see [`crate::task::parse_go_duration`]).
    pub fn parse(text: &str) -> Result<GoDuration, String> {
        crate::task::parse_go_duration(text).map(|duration| GoDuration {
            text: text.to_string(),
            duration,
        })
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// A job: a plan run as builds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_name: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub public: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub disable_manual_trigger: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub disable_reruns: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub serial: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub interruptible: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub serial_groups: Vec<String>,
    /// 0 (or absent) is no limit; `serial` and `serial_groups` make it 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Deprecated by `build_log_retention.builds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_logs_to_retain: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_log_retention: Option<BuildLogRetention>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_success: Option<Box<Step>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<Box<Step>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_abort: Option<Box<Step>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_error: Option<Box<Step>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ensure: Option<Box<Step>>,
    pub plan: Vec<Step>,
}

impl PipelineConfig {
    pub fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| j.name == name)
    }

    pub fn resource(&self, name: &str) -> Option<&Resource> {
        self.resources.iter().find(|r| r.name == name)
    }

    pub fn resource_type(&self, name: &str) -> Option<&ResourceType> {
        self.resource_types.iter().find(|t| t.name == name)
    }

    /// The jobs a get's `passed` names, patterns expanded, each once, in
    /// config order. (Validation refused a pattern that does not compile.)
    pub fn passed_jobs(&self, get: &GetStep) -> Vec<&str> {
        let globs: Vec<glob::Glob> = get
            .passed
            .iter()
            .filter(|p| glob::is_pattern(p))
            .filter_map(|p| glob::Glob::compile(p).ok())
            .collect();
        self.jobs
            .iter()
            .filter(|j| get.passed.contains(&j.name) || globs.iter().any(|g| g.matches(&j.name)))
            .map(|j| j.name.as_str())
            .collect()
    }

    /// The jobs a group's `jobs` names, patterns (with `{a,b}`) expanded,
    /// each once, in config order. (Validation refused a pattern that does
    /// not compile.)
    pub fn group_jobs(&self, group: &Group) -> Vec<&str> {
        let globs: Vec<glob::Glob> = group
            .jobs
            .iter()
            .filter(|p| glob::is_pattern(p))
            .filter_map(|p| glob::Glob::compile_with_braces(p).ok())
            .collect();
        self.jobs
            .iter()
            .filter(|j| group.jobs.contains(&j.name) || globs.iter().any(|g| g.matches(&j.name)))
            .map(|j| j.name.as_str())
            .collect()
    }

    /// The pipeline's custom types as a build carries them.
    pub fn build_resource_types(&self) -> Vec<crate::resource_types::ResourceType> {
        self.resource_types
            .iter()
            .map(ResourceType::to_build_type)
            .collect()
    }
}

impl Job {
    /// Every step of the job, hooks included, with its location
    /// (`jobs.build.plan.do[0]`, `jobs.build.plan.on_success`), in plan
    /// order.
    pub fn steps(&self) -> Vec<(String, &Step)> {
        let mut out = Vec::new();
        let at = format!("jobs.{}", names::show(&self.name));
        validate::for_each_step(self, &mut |path, step| {
            out.push((format!("{at}{path}"), step));
        });
        out
    }

    /// The job's gets: what the scheduler resolves versions for.
    pub fn inputs(&self) -> Vec<&GetStep> {
        self.steps()
            .into_iter()
            .filter_map(|(_, s)| match &s.action {
                Action::Get(g) => Some(g),
                _ => None,
            })
            .collect()
    }

    /// The job's puts.
    pub fn outputs(&self) -> Vec<&PutStep> {
        self.steps()
            .into_iter()
            .filter_map(|(_, s)| match &s.action {
                Action::Put(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// How many builds of the job may run at once; 0 is no limit.
    pub fn max_in_flight(&self) -> u32 {
        if self.serial || !self.serial_groups.is_empty() {
            1
        } else {
            self.max_in_flight.unwrap_or(0)
        }
    }

    /// The job's hooks with their names, in Concourse's order.
    pub fn hooks(&self) -> [(&'static str, Option<&Step>); 5] {
        [
            ("on_success", self.on_success.as_deref()),
            ("on_failure", self.on_failure.as_deref()),
            ("on_abort", self.on_abort.as_deref()),
            ("on_error", self.on_error.as_deref()),
            ("ensure", self.ensure.as_deref()),
        ]
    }
}

/// Which build logs are kept; 0 is no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BuildLogRetention {
    #[serde(skip_serializing_if = "is_zero")]
    pub builds: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub minimum_succeeded_builds: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub days: u32,
}

/// How the pipeline's page looks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Display {
    /// An `http`, `https` or relative URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_image: Option<String>,
    /// A CSS filter over the image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_filter: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One refusal: where (`jobs.build.plan.do[0].get(repo)`) and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A warning: the config is accepted, but something in it is likely
/// wrong. `kind` is Concourse's warning type (`invalid_identifier`,
/// `deprecated_field`, `pipeline`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigWarning {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

/// Why a config was refused: every error found, and the warnings found
/// along the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineErrors {
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<ConfigWarning>,
}

impl fmt::Display for PipelineErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid pipeline config:")?;
        for e in &self.errors {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PipelineErrors {}

/// Checks a pipeline, job or resource name given outside a config (a URL,
/// a CLI flag) by the rule names inside a config follow: names unsafe as
/// path segments (`/`, `\\`, control characters, `.`, `..`) and names over
/// [`MAX_NAME_LEN`] are refused (Concourse only warns); what Concourse
/// warns about is accepted.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    match names::check(name) {
        names::Verdict::Refuse(why) => Err(format!("{what} {}: {why}", names::show(name))),
        names::Verdict::Valid | names::Verdict::Warn(_) => Ok(()),
    }
}

/// A config that was accepted, with its warnings.
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    pub config: PipelineConfig,
    pub warnings: Vec<ConfigWarning>,
}

/// Reads and validates a pipeline config from its YAML (or JSON) text.
pub fn parse_pipeline(yaml: &str) -> Result<Validated, PipelineErrors> {
    if yaml.len() > MAX_CONFIG_BYTES {
        return Err(one_error(format!(
            "the config is {} bytes, more than the limit of {MAX_CONFIG_BYTES}",
            yaml.len()
        )));
    }
    let value = crate::yaml::from_str(yaml).map_err(|e| one_error(e.to_string()))?;
    parse_pipeline_value(&value)
}

/// Reads and validates a pipeline config already read into a value (as
/// web stores it).
pub fn parse_pipeline_value(value: &Value) -> Result<Validated, PipelineErrors> {
    let mut out = read::read_config(value);
    if out.errors.is_empty() {
        validate::validate(&out.config, &mut out.errors, &mut out.warnings);
    }
    if out.errors.is_empty() {
        read_across::check_planned(&out.config, &mut out.errors);
    }
    if out.errors.is_empty() {
        Ok(Validated {
            config: out.config,
            warnings: out.warnings,
        })
    } else {
        Err(PipelineErrors {
            errors: out.errors,
            warnings: out.warnings,
        })
    }
}

fn one_error(message: String) -> PipelineErrors {
    PipelineErrors {
        errors: vec![ConfigError {
            path: String::new(),
            message,
        }],
        warnings: vec![],
    }
}

/// A stored config is read back through the same rules it was accepted by.
impl<'de> Deserialize<'de> for PipelineConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        parse_pipeline_value(&value)
            .map(|v| v.config)
            .map_err(serde::de::Error::custom)
    }
}

/// Writes a map of the given entries, skipping absent ones; for types whose
/// JSON is a mapping with keys in sorted order, as Concourse's are.
fn serialize_entries<S: Serializer>(s: S, entries: Map<String, Value>) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(entries.len()))?;
    for (k, v) in &entries {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

#[cfg(test)]
mod tests;
