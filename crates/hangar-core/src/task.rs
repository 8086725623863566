//! A task's config: Concourse's task config format
//! (<https://concourse-ci.org/tasks.html>), parsed from YAML and validated.
//!
//! Parsing happens in two passes. The first reads the YAML into a JSON
//! value the way Concourse does ([`crate::yaml`]: YAML 1.1 scalars, merge
//! keys, bounded alias expansion). The second maps that value onto
//! [`TaskConfig`] with the path of every field tracked, so errors say where
//! they are (`run.path: missing field`), and coerces params to text as
//! Concourse does. Then [`TaskConfig::validate`] checks the rules serde
//! cannot express. A plan carries a config as JSON, and web and the engine
//! read it with [`parse_task_value`], the second pass alone.
//!
//! Where hangar is stricter than Concourse (paths with `..` or absolute,
//! artifact names, two artifacts at one path), the refusal says so and names
//! what Concourse would do. hangar's one extension is `attempts`: how many
//! times a task is tried when the infrastructure (not the task's own
//! command) fails.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::names::shorten;

/// The largest task config accepted, in bytes, checked before parsing.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

/// The most values (scalars, sequences and mappings, map keys included) a
/// document may hold once its aliases are expanded.
pub const MAX_CONFIG_VALUES: usize = crate::yaml::MAX_VALUES;

/// The largest memory limit accepted: 1 TiB.
pub const MAX_MEMORY_BYTES: u64 = 1 << 40;

/// The CPU shares a `container_limits.cpu` may ask for: the kernel's range
/// of `cpu.shares`.
pub const MIN_CPU_SHARES: u64 = 2;
pub const MAX_CPU_SHARES: u64 = 262_144;

/// How many times a task is tried when `attempts` is not given.
pub const DEFAULT_ATTEMPTS: u32 = 3;

/// The most attempts a task may ask for.
pub const MAX_ATTEMPTS: u32 = 10;

/// The longest input or output name.
pub const MAX_ARTIFACT_NAME_LEN: usize = 63;

/// A task's config, as Concourse defines it, plus `attempts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (the task config)")]
pub struct TaskConfig {
    /// The platform the task runs on (`linux`, …): only workers of that
    /// platform are chosen.
    pub platform: String,
    /// The image the task runs in, as a resource: fetched with the resource
    /// type's `check` and `in` on the task's worker and run under runc,
    /// unless the step gives an image of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_resource: Option<ImageResource>,
    /// The task's root filesystem: a path on the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<TaskInput>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<TaskOutput>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caches: Vec<TaskCache>,
    /// Environment variables for the task, coerced to text as Concourse
    /// does: numbers and booleans become their text (`true`, `493` for
    /// `0755`, `1.5`), a param with no value the empty string, lists and
    /// mappings their JSON.
    #[serde(
        default,
        deserialize_with = "deserialize_params",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub params: BTreeMap<String, String>,
    pub run: RunConfig,
    #[serde(default, skip_serializing_if = "ContainerLimits::is_empty")]
    pub container_limits: ContainerLimits,
    /// hangar's extension: infrastructure retries, 1 to 10.
    #[serde(default = "default_attempts")]
    pub attempts: u32,
}

fn default_attempts() -> u32 {
    DEFAULT_ATTEMPTS
}

/// `image_resource`: the resource that provides the task's image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping (type, source, params, version, name, tags)"
)]
pub struct ImageResource {
    /// A label for the image in the build's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub type_name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub source: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<BTreeMap<String, String>>,
    /// Worker tags for the image's check and fetch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// An artifact the task reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (name, path, optional)")]
pub struct TaskInput {
    pub name: String,
    /// Where the input appears, relative to the working directory; the
    /// name when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The task runs even when no artifact of this name is given.
    #[serde(default, skip_serializing_if = "is_false")]
    pub optional: bool,
}

/// An artifact the task writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (name, path)")]
pub struct TaskOutput {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A directory kept between runs of the task on one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (path, ttl)")]
pub struct TaskCache {
    pub path: String,
    /// A cache unused for this long is started afresh (a Go duration such
    /// as `24h` or `90m`, at least `1s`, as Concourse reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

impl TaskCache {
    /// The ttl, once [`TaskConfig::validate`] has accepted it.
    pub fn ttl(&self) -> Option<std::time::Duration> {
        self.ttl.as_deref().and_then(|t| parse_go_duration(t).ok())
    }
}

/// The command the task runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (path, args, dir, user)")]
pub struct RunConfig {
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The working directory, relative to the task's build directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// `container_limits`. As in Concourse, 0 (or null) means no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (memory, cpu)")]
pub struct ContainerLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryLimit>,
    /// CPU shares: a weight relative to other containers, not a count of
    /// cores. A number; a fraction is cut to its whole part, as Concourse
    /// does.
    #[serde(
        default,
        deserialize_with = "deserialize_cpu",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu: Option<u64>,
}

impl ContainerLimits {
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.cpu.is_none()
    }
}

/// A memory limit in bytes. In YAML: a number of bytes, or a string with a
/// unit (`"512MB"`, `"1GiB"`, `"1G"`, `"1.5g"`). As in Concourse, every unit
/// is a power of 1024 whether or not it is written with an `i`; hangar also
/// takes fractions, `T` and `P`, and a space before the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemoryLimit(pub u64);

fn is_false(b: &bool) -> bool {
    !*b
}

impl TaskConfig {
    /// The path of the input `name` (its `path`, or its name), or `None`
    /// when the task has no such input.
    pub fn input_path(&self, name: &str) -> Option<&str> {
        self.inputs
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.path.as_deref().unwrap_or(&i.name))
    }

    /// The path of the output `name` (its `path`, or its name).
    pub fn output_path(&self, name: &str) -> Option<&str> {
        self.outputs
            .iter()
            .find(|o| o.name == name)
            .map(|o| o.path.as_deref().unwrap_or(&o.name))
    }

    /// The input an output shares its path with, if any: the task changes
    /// that input in place and the output is the changed input.
    pub fn input_at_output_path(&self, output: &TaskOutput) -> Option<&TaskInput> {
        let normal = |p: &str| check_relative_path(p).ok();
        let at = normal(output.path.as_deref().unwrap_or(&output.name))?;
        self.inputs
            .iter()
            .find(|i| normal(i.path.as_deref().unwrap_or(&i.name)).as_ref() == Some(&at))
    }

    /// The memory limit in bytes, when one is set (0 is none).
    pub fn memory_limit_bytes(&self) -> Option<u64> {
        self.container_limits.memory.map(|m| m.0).filter(|b| *b > 0)
    }

    /// The user to run as, when one is named (Concourse reads an empty
    /// `run.user` as none: the image's or the worker's default).
    pub fn run_user(&self) -> Option<&str> {
        self.run.user.as_deref().filter(|u| !u.is_empty())
    }

    /// The CPU shares, when set (0 is none).
    pub fn cpu_shares(&self) -> Option<u64> {
        self.container_limits.cpu.filter(|c| *c > 0)
    }

    /// Whether a step can run this config. Every valid config can now: a
    /// task that names an `image_resource` has its image fetched by the
    /// engine on the task's worker (a step's own `image` artifact wins over
    /// it, as in Concourse). Kept as the one place a step-dependent refusal
    /// would go; `privileged` needs none: it is a field of the step (placed
    /// on a worker started with `--allow-privileged`), never of the config,
    /// which refuses it as an unknown field, as Concourse's does.
    pub fn check_runnable(&self, _step_gives_image: bool) -> Result<(), TaskConfigError> {
        Ok(())
    }

    /// Checks the rules the types alone do not: names, paths, ranges.
    /// [`parse_task_config`] calls it; call it on a config built in code.
    pub fn validate(&self) -> Result<(), TaskConfigError> {
        let fail = |field: String, message: String| Err(TaskConfigError::field(field, message));

        if self.platform.trim().is_empty() {
            return fail("platform".into(), "must not be empty".into());
        }
        if let Some(image) = &self.image_resource {
            if let Err(e) = crate::names::validate_label(&image.type_name) {
                return fail(
                    "image_resource.type".into(),
                    format!(
                        "{:?} is not a valid resource type name ({})",
                        e.name, e.reason
                    ),
                );
            }
            for (i, tag) in image.tags.iter().enumerate() {
                if let Err(e) = crate::names::validate_label(tag) {
                    return fail(
                        format!("image_resource.tags[{i}]"),
                        format!("{:?} is not a valid tag ({})", e.name, e.reason),
                    );
                }
            }
        }
        if let Some(uri) = &self.rootfs_uri {
            if uri.is_empty() {
                return fail("rootfs_uri".into(), "must not be empty".into());
            }
            if uri.chars().any(char::is_control) {
                return fail(
                    "rootfs_uri".into(),
                    "must not contain control characters".into(),
                );
            }
            if let Some((scheme, _)) = uri.split_once("://") {
                if scheme != "raw" {
                    return fail(
                        "rootfs_uri".into(),
                        format!(
                            "{:?}: hangar takes only raw:///path (a root filesystem on the \
                             worker); images from a registry ({scheme}://) are not fetched yet",
                            shorten(uri)
                        ),
                    );
                }
            }
        }

        // Names are unique among inputs and among outputs; an output may
        // share an input's name (it replaces that artifact for later steps)
        // and its path (the task changes the input in place, Concourse's
        // idiom). Any other two artifacts or caches at one path are refused.
        let mut input_names: HashMap<&str, String> = HashMap::new();
        let mut output_names: HashMap<&str, String> = HashMap::new();
        let mut input_paths: HashMap<String, String> = HashMap::new();
        let mut other_paths: HashMap<String, String> = HashMap::new();
        for (i, input) in self.inputs.iter().enumerate() {
            let owner = format!("inputs[{i}]");
            check_name(&owner, &input.name)?;
            if let Some(first) = input_names.insert(&input.name, owner.clone()) {
                return fail(
                    format!("{owner}.name"),
                    format!("{:?} is already the name of {first}", input.name),
                );
            }
            let (field, path) = artifact_path_field(&owner, &input.name, &input.path);
            let normal =
                check_artifact_path(path).map_err(|m| TaskConfigError::field(&field, m))?;
            if let Some(first) = input_paths.insert(normal, owner) {
                return fail(
                    field,
                    format!("{:?} is already the path of {first}", shorten(path)),
                );
            }
        }
        for (i, output) in self.outputs.iter().enumerate() {
            let owner = format!("outputs[{i}]");
            check_name(&owner, &output.name)?;
            if let Some(first) = output_names.insert(&output.name, owner.clone()) {
                return fail(
                    format!("{owner}.name"),
                    format!("{:?} is already the name of {first}", output.name),
                );
            }
            let (field, path) = artifact_path_field(&owner, &output.name, &output.path);
            let normal =
                check_artifact_path(path).map_err(|m| TaskConfigError::field(&field, m))?;
            if let Some(first) = other_paths.insert(normal, owner) {
                return fail(
                    field,
                    format!("{:?} is already the path of {first}", shorten(path)),
                );
            }
        }
        for (i, cache) in self.caches.iter().enumerate() {
            let owner = format!("caches[{i}]");
            let field = format!("{owner}.path");
            let normal =
                check_artifact_path(&cache.path).map_err(|m| TaskConfigError::field(&field, m))?;
            let first = input_paths
                .get(&normal)
                .or_else(|| other_paths.get(&normal));
            if let Some(first) = first {
                return fail(
                    field,
                    format!("{:?} is already the path of {first}", shorten(&cache.path)),
                );
            }
            other_paths.insert(normal, owner.clone());
            if let Some(ttl) = &cache.ttl {
                match parse_go_duration(ttl) {
                    Ok(d) if d >= std::time::Duration::from_secs(1) => {}
                    Ok(_) => {
                        return fail(
                            format!("{owner}.ttl"),
                            format!("{:?} is less than 1s, as in Concourse", shorten(ttl)),
                        )
                    }
                    Err(m) => return fail(format!("{owner}.ttl"), m),
                }
            }
        }

        for (key, value) in &self.params {
            if key.is_empty() || key.contains(['=', '\0']) {
                return fail(
                    "params".into(),
                    format!(
                        "{:?} cannot be an environment variable name (empty, or holds '=' or NUL)",
                        shorten(key)
                    ),
                );
            }
            if value.contains('\0') {
                return fail(
                    format!("params.{key}"),
                    "must not contain a NUL character".into(),
                );
            }
        }

        if self.run.path.trim().is_empty() {
            return fail("run.path".into(), "must not be empty".into());
        }
        if self.run.path.contains('\0') || self.run.args.iter().any(|a| a.contains('\0')) {
            return fail(
                "run".into(),
                "path and args must not contain a NUL character".into(),
            );
        }
        if let Some(dir) = &self.run.dir {
            if let Err(message) = check_relative_path(dir) {
                return fail("run.dir".into(), message);
            }
        }
        if let Some(user) = self.run.user.as_deref().filter(|u| !u.is_empty()) {
            if let Err(message) = crate::users::parse_user(user) {
                return fail("run.user".into(), message);
            }
        }

        if let Some(MemoryLimit(bytes)) = self.container_limits.memory {
            if bytes > MAX_MEMORY_BYTES {
                return fail(
                    "container_limits.memory".into(),
                    format!("{bytes} bytes is more than the limit of 1 TiB"),
                );
            }
        }

        if let Some(shares) = self.cpu_shares() {
            if !(MIN_CPU_SHARES..=MAX_CPU_SHARES).contains(&shares) {
                return fail(
                    "container_limits.cpu".into(),
                    format!(
                        "{shares} is out of range: CPU shares go from {MIN_CPU_SHARES} to \
                         {MAX_CPU_SHARES} (Concourse passes other values on for the kernel to \
                         clamp; hangar refuses them), or 0 for no limit"
                    ),
                );
            }
        }

        if !(1..=MAX_ATTEMPTS).contains(&self.attempts) {
            return fail(
                "attempts".into(),
                format!("{} is out of range (1 to {MAX_ATTEMPTS})", self.attempts),
            );
        }
        Ok(())
    }
}

/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,62}`: the rule for input and output names.
pub fn is_valid_artifact_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_ARTIFACT_NAME_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn check_name(owner: &str, name: &str) -> Result<(), TaskConfigError> {
    if is_valid_artifact_name(name) {
        return Ok(());
    }
    Err(TaskConfigError::field(
        format!("{owner}.name"),
        format!(
            "{:?} is not a valid name: hangar takes 1 to {MAX_ARTIFACT_NAME_LEN} letters, digits, \
             '_', '.' or '-', starting with a letter or digit, because an artifact's name is \
             also a directory and part of URLs (Concourse takes any non-empty name)",
            shorten(name)
        ),
    ))
}

/// The field an artifact's path is read from (its `path`, else its name)
/// and that path.
fn artifact_path_field<'a>(
    owner: &str,
    name: &'a str,
    path: &'a Option<String>,
) -> (String, &'a str) {
    match path {
        Some(p) => (format!("{owner}.path"), p),
        None => (format!("{owner}.name"), name),
    }
}

/// A relative path with no `..`: returns it normalised (no `.` components,
/// no repeated or trailing `/`), which may be empty for `.`.
fn check_relative_path(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("must not be empty".into());
    }
    if path.chars().any(char::is_control) {
        return Err(format!(
            "{:?} must not contain control characters",
            shorten(path)
        ));
    }
    if path.starts_with('/') {
        return Err(format!(
            "{:?} is absolute: hangar mounts artifacts and caches only below the task's \
             working directory, so the path must be relative to it (Concourse would use the \
             absolute path as it is)",
            shorten(path)
        ));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            ".." => {
                return Err(format!(
                    "{:?} must not contain \"..\": Concourse silently deletes every \"..\" \
                     from a path, hangar refuses so a path means what it says",
                    shorten(path)
                ))
            }
            "" | "." => {}
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// An input, output or cache path: relative, no `..`, and naming a directory
/// below the working directory (not `.` itself).
fn check_artifact_path(path: &str) -> Result<String, String> {
    let normal = check_relative_path(path)?;
    if normal.is_empty() {
        return Err(format!(
            "{path:?} must name a directory below the working directory (Concourse would \
             put the artifact at the working directory itself; hangar mounts every artifact \
             and cache in a directory of its own)"
        ));
    }
    Ok(normal)
}

/// Why a task config was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskConfigError {
    place: Place,
    message: String,
}

/// Where in the document a [`TaskConfigError`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The document as a whole (too large, empty, …).
    Document,
    /// A field, as a path: `run.path`, `inputs[1].name`.
    Field(String),
    /// A position in the text, for YAML syntax errors (1-based).
    Position { line: usize, column: usize },
}

impl TaskConfigError {
    fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        let place = if field.is_empty() || field == "." {
            Place::Document
        } else {
            Place::Field(field)
        };
        TaskConfigError {
            place,
            message: message.into(),
        }
    }

    pub(crate) fn document(message: impl Into<String>) -> Self {
        TaskConfigError {
            place: Place::Document,
            message: message.into(),
        }
    }

    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The field path the error is about, when it is about one.
    pub fn field_path(&self) -> Option<&str> {
        match &self.place {
            Place::Field(f) => Some(f),
            _ => None,
        }
    }

    /// What is wrong, without the place.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for TaskConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task config: ")?;
        match &self.place {
            Place::Document => {}
            Place::Field(field) => write!(f, "{field}: ")?,
            Place::Position { line, column } => write!(f, "line {line} column {column}: ")?,
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for TaskConfigError {}

/// Parses and validates a task config from its YAML (or JSON) text.
pub fn parse_task_config(yaml: &str) -> Result<TaskConfig, TaskConfigError> {
    if yaml.len() > MAX_CONFIG_BYTES {
        return Err(TaskConfigError::document(format!(
            "the document is {} bytes, more than the limit of {MAX_CONFIG_BYTES}",
            yaml.len()
        )));
    }
    let value = crate::yaml::from_str(yaml).map_err(|e| TaskConfigError {
        place: match e.position {
            Some((line, column)) => Place::Position { line, column },
            None => Place::Document,
        },
        message: e.message,
    })?;
    parse_task_value(value)
}

/// Parses and validates a task config already read into a value (a plan's
/// JSON, or YAML read by [`crate::yaml::from_str`] and interpolated).
pub fn parse_task_value(value: serde_json::Value) -> Result<TaskConfig, TaskConfigError> {
    if value.is_null() {
        return Err(TaskConfigError::document("the document is empty"));
    }
    let config: TaskConfig = serde_path_to_error::deserialize(value).map_err(|e| {
        let message = e.inner().to_string();
        let segments: Vec<_> = e.path().iter().collect();
        // An unknown field's path ends with the unknown key itself: the
        // error is about the mapping that holds it.
        let segments = match segments.split_last() {
            Some((serde_path_to_error::Segment::Map { .. }, parent))
                if message.starts_with("unknown field `") =>
            {
                parent
            }
            _ => &segments[..],
        };
        tidy_serde_error(&render_path(segments), &message)
    })?;
    config.validate()?;
    Ok(config)
}

/// A field path as serde_path_to_error writes one (`inputs[1].name`), `.`
/// for the top.
fn render_path(segments: &[&serde_path_to_error::Segment]) -> String {
    use serde_path_to_error::Segment;
    let mut path = String::new();
    for segment in segments {
        if !path.is_empty() && !matches!(segment, Segment::Seq { .. }) {
            path.push('.');
        }
        path.push_str(&segment.to_string());
    }
    if path.is_empty() {
        path.push('.');
    }
    path
}

/// Rewrites serde's messages into this module's style: field names are not
/// quoted with backticks, the field a `missing field` is about goes into the
/// path, and YAML's null is called null.
fn tidy_serde_error(path: &str, message: &str) -> TaskConfigError {
    let join = |name: &str| {
        if path == "." {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return TaskConfigError::field(join(name), "missing field");
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        // The expected list is last and made of our own field names, so the
        // last separator is the real one even if the unknown name holds one.
        let split = ["`, expected ", "`, there are no fields"]
            .iter()
            .filter_map(|sep| rest.rfind(sep))
            .max();
        if let Some(at) = split {
            let unknown = shorten(&rest[..at]);
            let tail = rest[at + 1..].replace('`', "");
            return TaskConfigError::field(path, format!("unknown field {unknown:?}{tail}"));
        }
    }
    let mut message = message.replace("invalid type: unit value", "invalid type: null");
    // A list where a mapping belongs reaches a derived struct's sequence
    // form, which talks of its length.
    if let Some(rest) = message.strip_prefix("invalid length ") {
        if let Some((_, expected)) = rest.split_once(", expected a mapping") {
            message = format!("invalid type: sequence, expected a mapping{expected}");
        }
    }
    TaskConfigError::field(path, message)
}

fn deserialize_params<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct ParamsVisitor;

    impl<'de> Visitor<'de> for ParamsVisitor {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a mapping of names to values")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut params = BTreeMap::new();
            // next_entry goes through the path-tracking wrapper, so an error
            // in a value is reported as `params.NAME`.
            while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
                params.insert(key, param_text(&value));
            }
            Ok(params)
        }
    }

    deserializer.deserialize_any(ParamsVisitor)
}

/// A param's value as the task's environment gets it, by Concourse's rule
/// (`CoercedString`): a string as it is, a number as Go writes it, null as
/// the empty string, anything else as Go's JSON of it.
pub fn param_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        serde_json::Value::Number(n) => crate::yaml::go_number_text(n),
        other => crate::yaml::go_json(other),
    }
}

/// `container_limits.cpu`: a number, cut to its whole part as Concourse
/// does; null is no limit.
fn deserialize_cpu<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    struct CpuVisitor;

    impl Visitor<'_> for CpuVisitor {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number of CPU shares")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
            Ok(None)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<u64>, E> {
            Ok(Some(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u64>, E> {
            u64::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("{v} is negative")))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<u64>, E> {
            if v < 0.0 || !v.is_finite() || v >= u64::MAX as f64 {
                return Err(E::custom(format!("{v} is not a number of CPU shares")));
            }
            Ok(Some(v.trunc() as u64))
        }
    }

    deserializer.deserialize_any(CpuVisitor)
}

/// Go's `time.ParseDuration`: a sequence of decimal numbers with units
/// (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), such as `1h30m` or `1.5s`; `0`
/// alone; a sign in front.
pub fn parse_go_duration(text: &str) -> Result<std::time::Duration, String> {
    let bad = || {
        format!(
            "{:?} is not a duration (a number with a unit ns, us, ms, s, m or h, such as \
             \"24h\" or \"1h30m\")",
            shorten(text)
        )
    };
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        nanos += value * scale;
        rest = next;
    }
    if negative && nanos > 0.0 {
        return Ok(std::time::Duration::ZERO);
    }
    if nanos > u64::MAX as f64 {
        return Err(format!("{:?} is too long", shorten(text)));
    }
    Ok(std::time::Duration::from_nanos(nanos as u64))
}

impl Serialize for MemoryLimit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for MemoryLimit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MemoryVisitor;

        impl Visitor<'_> for MemoryVisitor {
            type Value = MemoryLimit;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of bytes or a size like \"512MB\"")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MemoryLimit, E> {
                Ok(MemoryLimit(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MemoryLimit, E> {
                u64::try_from(v)
                    .map(MemoryLimit)
                    .map_err(|_| E::custom(format!("{v} is negative")))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<MemoryLimit, E> {
                // Concourse reads a number as a float and cuts it.
                if v < 0.0 || !v.is_finite() || v >= u64::MAX as f64 {
                    return Err(E::custom(format!("{v} is not a number of bytes")));
                }
                Ok(MemoryLimit(v.trunc() as u64))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemoryLimit, E> {
                parse_memory_size(v).map(MemoryLimit).map_err(E::custom)
            }
        }

        deserializer.deserialize_any(MemoryVisitor)
    }
}

/// Parses a memory size: digits with an optional fraction, an optional space,
/// then an optional unit `K`, `M`, `G`, `T` or `P` (any case, optionally
/// followed by `i` and/or `B`), or just `B`. Units are powers of 1024.
pub fn parse_memory_size(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "{:?} is not a memory size (bytes, or a number with a unit K, M, G or T, \
             e.g. \"512MB\" or \"1GiB\"; units are powers of 1024)",
            shorten(text)
        )
    };
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let unit = match unit.strip_prefix(' ') {
        Some("") => return Err(bad()),
        Some(unit) => unit,
        None => unit,
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    let digits_ok = |s: &str, max: usize| s.len() <= max && s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits_ok(whole, 20)
        || !digits_ok(fraction, 9)
        || (number.contains('.') && fraction.is_empty())
    {
        return Err(bad());
    }
    let lower = unit.to_ascii_lowercase();
    let (power, rest) = match lower.chars().next() {
        None => (0, ""),
        Some('k') => (1, &lower[1..]),
        Some('m') => (2, &lower[1..]),
        Some('g') => (3, &lower[1..]),
        Some('t') => (4, &lower[1..]),
        Some('p') => (5, &lower[1..]),
        Some('b') => (0, &lower[..]),
        Some(_) => return Err(bad()),
    };
    let rest_ok = match power {
        0 => matches!(rest, "" | "b"),
        _ => matches!(rest, "" | "b" | "i" | "ib"),
    };
    if !rest_ok {
        return Err(bad());
    }
    let multiplier: u128 = 1024u128.pow(power);
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let mut bytes = whole * multiplier;
    if !fraction.is_empty() {
        let numerator: u128 = fraction.parse().map_err(|_| bad())?;
        let denominator = 10u128.pow(fraction.len() as u32);
        bytes += numerator * multiplier / denominator;
    }
    u64::try_from(bytes).map_err(|_| format!("{:?} is too large", shorten(text)))
}

#[cfg(test)]
mod tests;
